"""Backbone families: each module here is one backbone family, registering itself (`register_architecture`)
when `pipeline.modeling.architecture` loads this package; adding a family is adding a module."""
