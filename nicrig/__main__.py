from nicrig.cli import program

program()
