"""Instruction catalog: PTX variants as data."""

from gpudissect.catalog.model import (
    Catalog,
    CatalogError,
    Operand,
    UnknownVariant,
    Variant,
    load_catalog,
)

__all__ = ["Catalog", "CatalogError", "Operand", "UnknownVariant", "Variant", "load_catalog"]
