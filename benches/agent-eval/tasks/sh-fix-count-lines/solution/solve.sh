sed -i 's/wc -w/wc -l/' count.sh
