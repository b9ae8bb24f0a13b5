"""Lowy & Razaviyayn, *Private Federated Learning Without a Trusted Server: Optimal Algorithms for Convex Losses*
(ICLR 2023): ``jaxfl reproduce lowy-convex/{mnist,insurance,obesity}``.

See README.md here."""
from papers.lowy_convex import studies  # noqa: F401  (registers the studies)
