# gnuplot script of benchmarks/RESULTS.md "Decode (CPU)": GB/s of K/V read against the cache
# length, one panel per (dtype, batch). Run from this directory: gnuplot decode.gp
set datafile separator ','
set terminal pngcairo size 1200,900 font ',10'
set output 'decode-gbps.png'
set multiplot layout 2,2 title 'flashattn decode, Nq = 1, Hq = 32, Hk = 8, d = 128, 2 threads (Zen 4, loaded host; dashed: measured read bandwidth)'
set logscale x 2
set xlabel 'cache length Nk'
set ylabel 'GB/s of K/V read'
set key top left
set yrange [0:*]
bw = system("awk -F, 'NR==2{print $11}' decode.csv") + 0
sel(dt, b, lay, im) = sprintf("< awk -F, '$1==\"%s\" && $2==%d && $4==\"%s\" && $5==\"%s\"' decode.csv", dt, b, lay, im)
do for [dt in "f32 bf16"] {
  do for [b in "1 8"] {
    set title sprintf('%s, B = %s', dt, b)
    plot sel(dt, b+0, 'contiguous', 'cpu') using 3:9 with linespoints title 'decode, contiguous', \
         sel(dt, b+0, 'paged-16', 'cpu') using 3:9 with linespoints title 'decode, paged 16', \
         sel(dt, b+0, 'paged-256', 'cpu') using 3:9 with linespoints title 'decode, paged 256', \
         sel(dt, b+0, 'contiguous', 'general') using 3:9 with linespoints title 'general path', \
         sel(dt, b+0, 'contiguous', 'standard') using 3:9 with linespoints title 'standard', \
         bw with lines dashtype 2 lc rgb 'black' title 'read bandwidth'
  }
}
unset multiplot
