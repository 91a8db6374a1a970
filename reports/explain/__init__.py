"""Rendering `explain` answers: the backend table, hybrid and attention-free sections, release history."""
