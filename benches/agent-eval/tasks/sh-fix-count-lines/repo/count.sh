#!/bin/sh
# Prints the number of lines of the file named by $1.
wc -w < "$1" | tr -d ' '
