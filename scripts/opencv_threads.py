"""Which OpenCV calls start its thread pool? The measurement behind lint's OpenCV table.

Run: ``python scripts/opencv_threads.py`` in an environment with ``opencv-python-headless``.
Each call runs in a fresh process on a 1024x1024 colour image; the script counts the process's
threads (``/proc/self/task``) before and after. OpenCV starts its pool (one thread per core,
less one) the first time a call takes its ``parallel_for_`` path, and keeps it: a call that
leaves the count unchanged never reaches that path, so a Dataset that only uses it adds no
threads to its workers. Prints one line per call and a JSON summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CALLS = {
    "imread": "cv2.imwrite(path, image); cv2.imread(path)",
    "imdecode": "cv2.imdecode(np.frombuffer(cv2.imencode('.png', image)[1], np.uint8), 1)",
    "imencode": "cv2.imencode('.jpg', image)",
    "cvtColor": "cv2.cvtColor(image, cv2.COLOR_BGR2RGB)",
    "resize": "cv2.resize(image, (512, 512))",
    "warpAffine": "cv2.warpAffine(image, cv2.getRotationMatrix2D((512, 512), 30, 1), (1024, 1024))",
    "warpPerspective": "cv2.warpPerspective(image, np.eye(3), (1024, 1024))",
    "remap": "cv2.remap(image, grid_x, grid_y, cv2.INTER_LINEAR)",
    "GaussianBlur": "cv2.GaussianBlur(image, (5, 5), 0)",
    "blur": "cv2.blur(image, (5, 5))",
    "medianBlur": "cv2.medianBlur(image, 5)",
    "filter2D": "cv2.filter2D(image, -1, np.ones((3, 3), np.float32) / 9)",
    "LUT": "cv2.LUT(image, np.arange(256, dtype=np.uint8)[::-1].copy())",
    "calcHist": "cv2.calcHist([image], [0], None, [256], [0, 256])",
    "equalizeHist": "cv2.equalizeHist(image[:, :, 0].copy())",
    "split_merge": "cv2.merge(cv2.split(image))",
    "flip": "cv2.flip(image, 1)",
    "copyMakeBorder": "cv2.copyMakeBorder(image, 8, 8, 8, 8, cv2.BORDER_REFLECT)",
    "threshold": "cv2.threshold(image, 127, 255, cv2.THRESH_BINARY)",
    "dilate": "cv2.dilate(image, np.ones((3, 3), np.uint8))",
    "normalize": "cv2.normalize(image, None, 0, 255, cv2.NORM_MINMAX)",
    "addWeighted": "cv2.addWeighted(image, 0.5, image, 0.5, 0)",
    "rectangle": "cv2.rectangle(image, (1, 1), (100, 100), (0, 255, 0), 2)",
    "imwrite": "cv2.imwrite(path, image)",
    "getRotationMatrix2D": "cv2.getRotationMatrix2D((512, 512), 30, 1)",
    "line_circle_putText": "cv2.line(image, (0, 0), (500, 500), (0, 0, 255), 3); "
    "cv2.circle(image, (300, 300), 50, (255, 0, 0), -1); "
    "cv2.putText(image, 'x', (10, 10), cv2.FONT_HERSHEY_SIMPLEX, 1, (0, 0, 0))",
}

_PROBE = """
import os, cv2, numpy as np, tempfile
image = (np.random.default_rng(0).random((1024, 1024, 3)) * 255).astype(np.uint8)
grid_x, grid_y = np.meshgrid(np.arange(1024, dtype=np.float32), np.arange(1024, dtype=np.float32))
path = os.path.join(tempfile.mkdtemp(), "probe.png")
before = len(os.listdir("/proc/self/task"))
{call}
after = len(os.listdir("/proc/self/task"))
print(before, after)
"""


def measure(call: str) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(call=call)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    before, after = done.stdout.split()
    return int(before), int(after)


def main() -> int:
    import cv2  # type: ignore[import-not-found]

    results = {}
    for name, call in _CALLS.items():
        before, after = measure(call)
        results[name] = after - before
        print(f"{name:16s} threads {before} -> {after}")
    print(json.dumps({"opencv": cv2.__version__, "cores": os.cpu_count(), "started": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
