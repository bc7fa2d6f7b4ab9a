import pipeline.steps as pipe

pipe.fit(epochs=2)
