"""The papers jaxfl reproduces, one home each: the study specs, data preparation, committed results and a README
setting the paper's tables beside jaxfl's. Not part of the installed library (``jaxfl`` never imports it):
``jaxfl reproduce NAME`` finds these homes from a clone of the repository (:mod:`jaxfl.studies.registry`)."""
