"""The version of tokenport, on the ground floor so that any room can name it without importing the root."""

__version__ = "0.1.0"
