"""Helpers shared by the vision tasks: image pre-processing, the on-disk sample cache, COCO mAP."""
