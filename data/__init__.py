"""nicrig.data"""
