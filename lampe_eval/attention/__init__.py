"""The exact segmented-attention engine shared by every position-remapping method."""

from .engine import AttentionPlan, segmented_attention
from .regions import Band, ChunkRelation, Region, Segment

__all__ = ["AttentionPlan", "Band", "ChunkRelation", "Region", "Segment", "segmented_attention"]
