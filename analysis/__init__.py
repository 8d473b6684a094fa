"""nicrig.analysis"""
