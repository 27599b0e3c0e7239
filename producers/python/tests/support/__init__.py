"""Helpers of the producers/python tests: test databases, the host binary, a webhook receiver."""
