#!/bin/sh
set -eu
: "${NAME:=world}"
