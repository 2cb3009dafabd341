"""ImageNet pre-processing for ResNet50 v1.5 (official TF/ONNX weights), as the reference does it.

The steps and constants live in :data:`mlharness.tasks.vision.preprocessing.RESNET50` (taken from
``vision/classification_and_detection/python/dataset.py`` ``pre_process_vgg`` and
``python/main.py`` ``SUPPORTED_DATASETS["imagenet"]``): OpenCV decode, RGB, INTER_AREA resize of
the short side to 256, centre crop 224x224, subtract means (123.68, 116.78, 103.94), NCHW float32.
Other ImageNet models declare their own :class:`ImagePreprocessing` instead of new code here.
"""

from __future__ import annotations

from mlharness.tasks.vision.preprocessing import RESNET50, ImagePreprocessor

#: ``path -> float32 [3, 224, 224]``; picklable, with a ``fingerprint`` for the sample cache
resnet50_preprocess = ImagePreprocessor(RESNET50)

__all__ = ["resnet50_preprocess", "RESNET50"]
