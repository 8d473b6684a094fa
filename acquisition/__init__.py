"""nicrig.acquisition"""
