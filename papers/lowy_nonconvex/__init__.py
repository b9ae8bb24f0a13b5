"""Lowy, Ghafelebashi & Razaviyayn, *Private Non-Convex Federated Learning Without a Trusted Server* (AISTATS 2023):
``jaxfl reproduce lowy-nonconvex/{mnist,wbcd,cifar10}``.

See README.md here."""
from papers.lowy_nonconvex import noise_study, studies  # noqa: F401  (registers the studies)
