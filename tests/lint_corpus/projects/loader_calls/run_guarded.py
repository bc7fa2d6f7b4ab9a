import pipeline.steps as pipe
from pipeline.framework import Trainer

if __name__ == "__main__":
    pipe.fit(epochs=2)
    Trainer(2048, epochs=3).train()
