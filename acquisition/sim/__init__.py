"""nicrig.acquisition.sim"""
