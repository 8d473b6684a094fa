"""nicrig.gui"""
