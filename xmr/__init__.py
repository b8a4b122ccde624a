"""xmr: measure and remove bias in image-text retrieval models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("xmr")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
