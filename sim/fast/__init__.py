"""Speed paths: accelerators that run a stretch of work exactly as the reference
path would, to the bit, or decline (None) and let the reference run it. The
reference modules never name them; each is reached through one door.
"""
