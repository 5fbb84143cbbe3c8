"""Gyms shipped with mua: one package per environment, each exposing `GYM` (a GymSpec)."""
