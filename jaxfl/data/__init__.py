"""Federated datasets: the silo-major :class:`FederatedData`, partitioners, loaders, preprocessing."""
from jaxfl.data.federated import FederatedData, from_silos
from jaxfl.data.loaders import (DATASETS, OBESITY_CLASSES, insurance_feature_names, load, load_breast_cancer,
                                load_cifar10, load_cifar10_subset, load_covtype_binary, load_digits, load_fashion_mnist,
                                load_insurance, load_libsvm, load_mnist, load_obesity, obesity_feature_names, read_idx)
from jaxfl.data.partition import (EVEN_ODD_PAIRS, by_silo_ids, choose_silo_classes, class_limited, dirichlet,
                                  dirichlet_mix, iid, label_pairs, one_class_per_silo, shards, sorted_by_target,
                                  train_test_split_per_silo)
from jaxfl.data.preprocess import AffineFit, PCAFit, add_bias_column, minmax_scale, one_hot, pca, standardize
from jaxfl.data.users import group_by_user, per_user_loss
from jaxfl.data.sources import (REGISTRY, ChecksumError, FileSpec, Source, data_dirs, download, find_file, locate,
                                verify)

__all__ = [
    "FederatedData", "from_silos",
    "iid", "one_class_per_silo", "label_pairs", "sorted_by_target", "dirichlet", "dirichlet_mix", "shards",
    "by_silo_ids",
    "train_test_split_per_silo", "EVEN_ODD_PAIRS", "choose_silo_classes", "class_limited", "group_by_user",
    "per_user_loss",
    "standardize", "minmax_scale", "pca", "one_hot", "add_bias_column", "AffineFit", "PCAFit",
    "load", "DATASETS", "load_mnist", "load_fashion_mnist", "load_cifar10", "load_cifar10_subset", "load_libsvm",
    "load_covtype_binary",
    "load_insurance", "load_obesity", "load_breast_cancer", "load_digits", "read_idx", "OBESITY_CLASSES",
    "insurance_feature_names", "obesity_feature_names",
    "download", "ChecksumError", "REGISTRY", "FileSpec", "Source", "data_dirs", "find_file", "locate", "verify",
]
