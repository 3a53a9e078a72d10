"""Cost models: pure functions from a step's shape to seconds.

Import each name from the module that defines it.
"""
