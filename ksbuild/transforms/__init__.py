"""Transformations: each is an interpreter over equations that calls one rule per primitive."""
