"""3D-UNet on KiTS19 (``3d-unet-99``, ``3d-unet-99.9``): the raw KiTS19 layout, the reference's
pre-processing with a cache, the sliding-window inference and DICE, each equal to the official
``vision/medical_imaging/3d-unet-kits19/`` scripts (docs/3d-unet.md).

- ``cases``: the inference cases and where each case's files are in a KiTS19 folder;
- ``preprocessing``: resampling, clipping, normalisation, padding (``preprocess.py``);
- ``cache``: one pre-processed volume per case on disk, keyed by the sources' checksums;
- ``window``: the sliding window over a volume, batched across windows (``base_SUT.py``,
  ``inference_utils.py``);
- ``dice``: the response bytes and DICE (``accuracy_kits.py``).
"""
