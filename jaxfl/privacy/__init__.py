"""Privacy primitives: keyed randomness, per-example clipping (and adaptive clipping to a private quantile),
Gaussian noise (and its secure lattice form), optax transforms, private mean estimation."""
from jaxfl.privacy import adaptive_clipping, ghost, keys, mean_estimation, normal, secure, shuffle, uniform
from jaxfl.privacy.adaptive_clipping import AdaptiveClip, adaptive_clip
from jaxfl.privacy.clipping import (ClippedSum, clip_by_global_norm, clip_update, clipped_grad_sum,
                                    explicit_clipped_grad_sum, per_example_grads, selected_clipped_grad_sum)
from jaxfl.privacy.keys import SERVER, Purpose
from jaxfl.privacy.noise import add_gaussian_noise, gaussian_like, noisy_clipped_mean, unit_noise_like
from jaxfl.privacy.secure import LatticeGaussian, os_random_key
from jaxfl.privacy.transforms import differentially_private_aggregate, gaussian_noise

__all__ = [
    "keys", "Purpose", "SERVER", "ClippedSum", "clip_by_global_norm", "clip_update", "clipped_grad_sum",
    "explicit_clipped_grad_sum", "selected_clipped_grad_sum", "ghost", "normal", "per_example_grads",
    "add_gaussian_noise", "gaussian_like", "noisy_clipped_mean", "unit_noise_like",
    "differentially_private_aggregate", "gaussian_noise", "shuffle", "mean_estimation", "uniform",
    "secure", "LatticeGaussian", "os_random_key", "adaptive_clipping", "AdaptiveClip", "adaptive_clip",
]
