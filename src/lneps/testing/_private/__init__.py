"""The implementation of :mod:`lneps.testing`, behind its face (as ``numpy.testing._private``).

Nothing here is public: import the names :mod:`lneps.testing` exports. Names the modules share
with one another carry no underscore; a leading underscore marks a name its module keeps.
"""
