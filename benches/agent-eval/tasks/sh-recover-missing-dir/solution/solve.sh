mkdir -p out
sh gen.sh
