"""The YOLO comparisons' world: a random-weight YOLO11 built by ultralytics in the YOLO referee's
Python, real photographs in the COCO safe subset's layout with synthetic annotations, the
reference ``yolo_loadgen.py`` run unmodified, and a tolerant comparison of two sets of
response rows."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

import referee
from mlharness.tasks.vision.letterbox import (LetterboxConfig, LetterboxPreprocessor,
                                              model_input, unpack)
from mlharness.tasks.vision.yolo_postprocess import NmsSettings, detect, response_rows

TESTS = Path(__file__).resolve().parent
YOLO_DIR = "vision/classification_and_detection/yolo"
ACCURACY_COCO = "vision/classification_and_detection/tools/accuracy-coco.py"

#: a licence of each kind: the safe filter keeps 1, 3 and 4 (by-sa, by, usa.gov), not 2 (by-nc)
LICENCES = [
    {"id": 1, "name": "CC BY-SA", "url": "http://creativecommons.org/licenses/by-sa/2.0/"},
    {"id": 2, "name": "CC BY-NC", "url": "http://creativecommons.org/licenses/by-nc/2.0/"},
    {"id": 3, "name": "CC BY", "url": "http://creativecommons.org/licenses/by/2.0/"},
    {"id": 4, "name": "US Government Work", "url": "http://www.usa.gov/copyright.shtml"},
]


@dataclass
class YoloWorld:
    root: Path
    model_dir: Path
    coco: Path  # the dataset folder: val2017_safe/ + annotations/instances_val2017.json
    size: str = "n"  # YOLO11's size: n in the tests, l is the benchmark's
    stem: str = ""  # the model files' name: yolo11<size>-random unless a checkpoint was given

    @property
    def pt(self) -> Path:
        return self.model_dir / f"{self.stem or f'yolo11{self.size}-random'}.pt"

    @property
    def onnx(self) -> Path:
        return self.pt.with_suffix(".onnx")

    @property
    def onnx640(self) -> Path:
        return self.pt.with_name(self.pt.stem + "-640.onnx")

    @property
    def images(self) -> Path:
        return self.coco / "val2017_safe"

    @property
    def annotations(self) -> Path:
        return self.coco / "annotations" / "instances_val2017.json"

    def image_list(self) -> list[dict]:
        return json.loads(self.annotations.read_text())["images"]


def hopper() -> Path:
    """matplotlib's sample photograph (the report extra installs matplotlib)."""
    import matplotlib

    return Path(matplotlib.__file__).parent / "mpl-data" / "sample_data" / "grace_hopper.jpg"


def photographs(model_dir: Path, images: Path) -> list[str]:
    """Five images from three real photographs: ultralytics' two (portrait 810 x 1080, wide
    1280 x 720), matplotlib's grace_hopper (512 x 600), a greyscale JPEG of one (decoded to 3
    channels) and a small crop (scaled up); JPEGs written here decode the same in both
    Pythons (the same OpenCV)."""
    images.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_dir / "bus.jpg", images / "000000000001.jpg")
    shutil.copyfile(model_dir / "zidane.jpg", images / "000000000002.jpg")
    shutil.copyfile(hopper(), images / "000000000003.jpg")
    zidane = cv2.imread(str(model_dir / "zidane.jpg"))
    cv2.imwrite(str(images / "000000000004.jpg"), cv2.cvtColor(zidane, cv2.COLOR_BGR2GRAY))
    bus = cv2.imread(str(model_dir / "bus.jpg"))
    cv2.imwrite(str(images / "000000000005.jpg"), bus[500:590, 300:440])
    return [f"00000000000{i}.jpg" for i in range(1, 6)]


def build_world(root: Path, size: str = "n", checkpoint: Path | None = None) -> YoloWorld:
    """Model (ultralytics, in the YOLO referee's Python: random weights of ``size``, or a
    trained ``checkpoint`` exported) and dataset under ``root``."""
    model_dir = root / "model"
    coco = root / "coco"
    world = YoloWorld(root, model_dir, coco, size, checkpoint.stem if checkpoint else "")
    which = ["--checkpoint", str(Path(checkpoint).resolve())] if checkpoint else ["--size", size]
    referee.yolo_python(str(TESTS / "yolo_referee_model.py"), *which, str(model_dir),
                        str(hopper()), cwd=root, timeout=1800)
    names = photographs(model_dir, world.images)
    images = []
    for number, name in enumerate(names, 1):
        h, w = cv2.imread(str(world.images / name)).shape[:2]
        images.append({"id": number * 7, "file_name": name, "height": h, "width": w,
                       "license": 1 + number % 2 * 2,  # 3, 1, 3, 1, 3: all safe
                       "coco_url": f"http://images.cocodataset.org/val2017/{name}"})
    write_annotations(world, images, [])
    return world


def predictor(model: Path, backend: str = "onnxruntime"):
    """``inputs -> output0`` on onnxruntime or OpenVINO (one thread: a shared machine)."""
    if backend == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        return lambda x: session.run(["output0"], {"images": x})[0]
    import openvino as ov

    compiled = ov.Core().compile_model(str(model), "CPU", {"INFERENCE_NUM_THREADS": 1,
                                                          "INFERENCE_PRECISION_HINT": "f32"})
    return lambda x: compiled(x)[compiled.output(0)]


def ours(images: Path, names: list[str], model: Path, config: LetterboxConfig | None = None,
         backend: str = "onnxruntime", batched: bool = True) -> dict[int, bytes]:
    """The response of each image ``names[i]`` (QSL index i) through mlharness's letterbox, the
    runtime and the NMS; images of one letterboxed shape in one batch (``batched``)."""
    prep = LetterboxPreprocessor(config or LetterboxConfig())
    run = predictor(model, backend)
    samples = [unpack(prep(images / name)) for name in names]
    groups: dict[tuple[int, ...], list[int]] = {}
    for idx, (_, boxed) in enumerate(samples):
        groups.setdefault(boxed.shape if batched else (idx,), []).append(idx)
    out: dict[int, bytes] = {}
    for members in groups.values():
        raw = run(model_input([samples[i][1] for i in members]))
        assert raw.shape[0] == len(members)
        for row, idx in zip(raw, members):
            original, boxed = samples[idx]
            found = detect(row, boxed.shape[:2], original, NmsSettings())
            out[idx] = response_rows(idx, found, original).tobytes()
    return out


def self_labelled(world: YoloWorld, root: Path, imgsz: int, count: int = 1525) -> Path:
    """A dataset of ``count`` images (the world's five photographs in turn, copied: a dataset's
    links may not leave its folder) whose annotations are the model's own detections above one
    score threshold, at ``imgsz``: every detection above it is right and every one below comes
    after all of those, so mAP is 100 (the benchmark's target is reachable with random
    weights). Returns the dataset folder."""
    names = [image["file_name"] for image in world.image_list()]
    shutil.copytree(world.images, root / "val2017_safe")
    found = ours(world.images, names, world.onnx, LetterboxConfig(imgsz=imgsz))
    rows = [np.frombuffer(found[i], np.float32).reshape(-1, 7) for i in range(len(names))]
    # above the 101st score of every photograph: at most 100 objects each (COCO's maxDets)
    cut = max((float(np.sort(r[:, 5])[::-1][100]) for r in rows if len(r) > 100), default=0.0)
    higher = min(float(s) for r in rows for s in r[:, 5] if s > cut)
    threshold = (cut + higher) / 2
    sizes = {i["file_name"]: (i["height"], i["width"]) for i in world.image_list()}
    images, anns = [], []
    for k in range(count):
        name = names[k % len(names)]
        h, w = sizes[name]
        images.append({"id": k + 1, "file_name": name, "height": h, "width": w, "license": 3,
                       "coco_url": f"http://images.cocodataset.org/val2017/{name}"})
        for row in rows[k % len(names)]:
            if row[5] > threshold:
                x, y = float(row[2]) * w, float(row[1]) * h
                bw, bh = float(row[4]) * w - x, float(row[3]) * h - y
                anns.append({"id": len(anns) + 1, "image_id": k + 1, "iscrowd": 0,
                             "category_id": int(row[6]), "area": bw * bh, "bbox": [x, y, bw, bh]})
    dataset = YoloWorld(root, world.model_dir, root, world.size, world.stem)
    write_annotations(dataset, images, anns)
    return root


def write_annotations(world: YoloWorld, images: list[dict], annotations: list[dict]) -> None:
    world.annotations.parent.mkdir(parents=True, exist_ok=True)
    categories = [{"id": int(c), "name": f"c{c}", "supercategory": "s"} for c in
                  (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
                   24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46,
                   47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
                   67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89,
                   90)]
    world.annotations.write_text(json.dumps({
        "info": {"description": "synthetic"}, "licenses": LICENCES, "images": images,
        "annotations": annotations, "categories": categories}))


def ground_truth_from(world: YoloWorld, entries: dict[int, bytes]) -> None:
    """Annotations made from a run's detections, so that mAP is neither 0 nor 100: per image
    the 2nd, 5th, 9th... detections as they are, the 3rd moved by a fifth of its size, and one
    object of a class nobody detected."""
    images = world.image_list()
    anns: list[dict] = []
    for idx, image in enumerate(images):
        rows = np.frombuffer(entries.get(idx, b""), np.float32).reshape(-1, 7)
        h, w = image["height"], image["width"]
        picked = [(r, 0.0) for k, r in enumerate(rows[:40]) if k in (1, 4, 8, 13, 21, 30)]
        picked += [(r, 0.2) for r in rows[2:3]]
        for row, shift in picked:
            x, y = float(row[2]) * w, float(row[1]) * h
            bw, bh = (float(row[4]) - float(row[2])) * w, (float(row[3]) - float(row[1])) * h
            anns.append({"id": len(anns) + 1, "image_id": image["id"],
                         "category_id": int(row[6]), "iscrowd": 0, "area": bw * bh,
                         "bbox": [x + shift * bw, y + shift * bh, bw, bh]})
        anns.append({"id": len(anns) + 1, "image_id": image["id"], "category_id": 90,
                     "iscrowd": 0, "area": 100.0, "bbox": [1.0, 1.0, 10.0, 10.0]})
    write_annotations(world, images, anns)


#: runs scripts one after another in one Python, each as ``python SCRIPT ARGS`` would (its
#: folder first on sys.path, run as ``__main__``, in its own working folder)
def run_scripts(jobs: list[tuple[Path, list[str]]], cwd: Path) -> None:
    """Scripts, unmodified, in ONE process of the YOLO referee's Python (ultralytics and torch
    imported once, not once a script): each ``(folder, [script, *args])`` in turn."""
    referee.VENVS["yolo"].run_scripts([(c, argv, None) for c, argv in jobs], cwd,
                                      env={"YOLO_CONFIG_DIR": str(cwd / ".ultralytics")})


def reference_job(world: YoloWorld, model: Path, out: Path,
                  scenario: str = "SingleStream") -> tuple[Path, list[str]]:
    """``yolo_loadgen.py`` unmodified, accuracy mode, logs under ``out/logs``: a job of
    :func:`run_scripts` (:func:`reference_log` reads what it logged)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "user.conf").write_text("")
    script = referee.INFERENCE / YOLO_DIR / "yolo_loadgen.py"
    return out, [str(script), "--model", str(model), "--dataset-path", str(world.images),
                 "--annotation-file", str(world.annotations), "--output", str(out / "logs"),
                 "--AccuracyOnly", "--scenario", scenario, "--user_conf",
                 str(out / "user.conf")]


def reference_log(out: Path) -> dict[int, bytes]:
    """The entries of the accuracy log a :func:`reference_job` wrote in ``out``."""
    log = out / "logs" / "mlperf_log_accuracy.json"
    assert log.is_file(), f"yolo_loadgen.py wrote no accuracy log in {out / 'logs'}"
    return read_log(log)


def run_reference(world: YoloWorld, model: Path, out: Path,
                  scenario: str = "SingleStream") -> dict[int, bytes]:
    """``yolo_loadgen.py`` unmodified, accuracy mode; its accuracy log's entries."""
    run_scripts([reference_job(world, model, out, scenario)], out)
    return reference_log(out)


def read_log(path: Path) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for entry in json.loads(path.read_text()):
        out.setdefault(int(entry["qsl_idx"]), bytes.fromhex(entry["data"]))
    return out


def write_log(path: Path, entries: dict[int, bytes]) -> Path:
    path.write_text(json.dumps([{"seq_id": i, "qsl_idx": q, "data": d.hex().upper()}
                                for i, (q, d) in enumerate(sorted(entries.items()))]))
    return path


def official_map(world: YoloWorld, entries: dict[int, bytes], work: Path) -> str:
    """``tools/accuracy-coco.py`` on a log of ``entries``: its ``mAP=`` line."""
    work.mkdir(parents=True, exist_ok=True)
    log = write_log(work / "mlperf_log_accuracy.json", entries)
    out = referee.run(ACCURACY_COCO, "--mlperf-accuracy-file", str(log), "--coco-dir",
                      str(world.coco), "--output-file", str(work / "coco-results.json"),
                      check=True).stdout
    return [line for line in out.splitlines() if line.startswith("mAP=")][0]


def differences(ref: bytes, ours: bytes, score_tol: float, box_tol: float) -> list[str]:
    """How two responses of one image differ beyond the tolerances: each reference row matched
    to one of ours of the same class, score within ``score_tol`` and every normalised
    coordinate within ``box_tol``. Rows left unmatched are allowed only at the ``max_det`` cut
    (score within ``score_tol`` of the lowest kept), where a near tie may fall either side."""
    a = np.frombuffer(ref, np.float32).reshape(-1, 7)
    b = np.frombuffer(ours, np.float32).reshape(-1, 7)
    free = np.ones(len(b), dtype=bool)
    unmatched_a = []
    for row in a:
        ok = (free & (b[:, 6] == row[6]) & (np.abs(b[:, 5] - row[5]) <= score_tol)
              & (np.abs(b[:, 1:5] - row[1:5]).max(axis=1, initial=0) <= box_tol))
        hits = np.flatnonzero(ok)
        if len(hits):
            free[hits[0]] = False
        else:
            unmatched_a.append(row)
    lowest = [float(x[:, 5].min()) for x in (a, b) if len(x)]
    cut = max(lowest, default=0.0) + score_tol
    problems = [f"reference row {r.tolist()} has no match" for r in unmatched_a if r[5] > cut]
    problems += [f"our row {r.tolist()} has no match" for r in b[free] if r[5] > cut]
    if len(a) != len(b):
        problems.append(f"{len(a)} reference rows, {len(b)} of ours")
    return problems
