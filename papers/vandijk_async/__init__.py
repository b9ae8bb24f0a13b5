"""van Dijk et al., *Asynchronous Federated Learning with Reduced Number of Rounds and with Differential Privacy
from Less Aggregated Gaussian Noise* (2020): ``jaxfl reproduce vandijk-async/...``.

See README.md here."""
from papers.vandijk_async import dp_studies, schedule_studies, studies  # noqa: F401  (registers the studies)
