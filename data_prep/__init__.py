"""Readers that turn public datasets into the plain records each gym builds its tasks from."""
