"""Triastcyn, Reisser & Louizos, *DP-REC: Private & Communication-Efficient Federated Learning* (2021):
``jaxfl reproduce dprec/{epsilon-table,mnist,femnist-scale}``.

See README.md here."""
from papers.dprec import epsilon_table, studies  # noqa: F401  (registers the studies)
