"""Cost layer: device, link and fabric specs, roofline and copy costs.

Importing the package registers every shipped catalogue entry by name
(:func:`devices.catalogue.register_catalogue`, idempotent).
"""

from hetsim.devices.catalogue import register_catalogue

register_catalogue()
