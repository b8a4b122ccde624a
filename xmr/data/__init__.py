"""Datasets as :class:`ImageRecord` lists: COCO, Flickr30k (+ Entities) and ToyWorld readers."""

from xmr.data.coco import read_coco
from xmr.data.errors import DataError, DataIssue
from xmr.data.flickr30k import read_flickr30k
from xmr.data.images import load_image
from xmr.data.records import Caption, EntityPhrase, ImageRecord, ObjectAnnotation
from xmr.data.registry import DATASETS, dataset_splits, read_dataset
from xmr.data.synthetic import SyntheticPair, read_synthetic
from xmr.data.toyworld_reader import (
    Counterfactual,
    GenderDesign,
    read_counterfactuals,
    read_gender_design,
    read_toyworld,
)

__all__ = [
    "DATASETS",
    "Caption",
    "Counterfactual",
    "DataError",
    "DataIssue",
    "EntityPhrase",
    "GenderDesign",
    "ImageRecord",
    "ObjectAnnotation",
    "SyntheticPair",
    "dataset_splits",
    "load_image",
    "read_coco",
    "read_counterfactuals",
    "read_dataset",
    "read_flickr30k",
    "read_gender_design",
    "read_synthetic",
    "read_toyworld",
]
