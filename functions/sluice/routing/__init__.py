"""Routing: how a split chooses (sticky hashing, weights, bandits) and how an ensemble's answers
combine. Pure: no I/O of its own. The policy nodes themselves are domain objects
(`sluice.domain.policy`)."""
