"""Small reusable pieces the stacks are built from; each takes keyword-only props."""
