"""A stand-in for Colab's own package in CI's Colab replica (.ci/colab-replica).

Code tells that it runs on Colab from ``"google.colab" in sys.modules``: Colab's kernel imports
the package at start, and so does the replica's (its IPython start-up file). Nothing else of
Colab's package is imitated.
"""
