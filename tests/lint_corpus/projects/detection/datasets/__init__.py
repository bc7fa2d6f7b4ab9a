from .coco import CocoBoxes

__all__ = ["CocoBoxes"]
