"""Lambda entry points: one module each, thin."""
