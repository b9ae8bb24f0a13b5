"""Huang, Jiang, Liu, Mahdian, Mao & Mirrokni, *Learning across Data Owners with Joint Differential Privacy* (2023):
``jaxfl reproduce huang-jdp/...`` (Tables 1, 2 and 4, Figure 1, and the studies of their gaps).

See README.md here."""
from papers.huang_jdp import derived_studies, studies  # noqa: F401  (registers the studies)
