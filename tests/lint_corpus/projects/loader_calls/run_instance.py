from pipeline.framework import Trainer

framework = Trainer(2048, epochs=3)
framework.train()
