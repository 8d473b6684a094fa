"""nicrig.udpmon"""
