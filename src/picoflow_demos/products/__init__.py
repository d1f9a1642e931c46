"""The product-lookup demo: one strictly validated tool over a catalog with visibilities."""

from picoflow_demos.products.catalog import Product, products, visible_product
from picoflow_demos.products.flow import Lookup, ProductFlow

__all__ = ["Lookup", "Product", "ProductFlow", "products", "visible_product"]
