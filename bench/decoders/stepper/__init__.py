'''
Benchmark-only decoder: wakes up on every sample or on every edge and does
nothing else, so that timing it measures the decode engine alone.
'''

from .pd import Decoder
