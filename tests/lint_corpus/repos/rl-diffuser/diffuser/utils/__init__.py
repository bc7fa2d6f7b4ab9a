from .config import Config
from .training import Trainer
