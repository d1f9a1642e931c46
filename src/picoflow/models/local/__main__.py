"""``python -m picoflow.models.local``: fetch and verify the embedded model's weights, print their path."""

from picoflow.models.local._model import fetch_model

print(fetch_model())
