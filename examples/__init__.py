"""Example programs that use mua without being part of it (see each folder's README)."""
