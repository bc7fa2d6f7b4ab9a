from augment.ops import *
