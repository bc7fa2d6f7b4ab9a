"""Process-wide setup, imported first by every entry point."""

import cv2

cv2.setNumThreads(0)  # OpenCV's pool would start one thread per core in every worker
