set terminal pngcairo size 1400,1000 font ',10' noenhanced
set output 'peers.png'
set multiplot layout 2,1 title 'AMD EPYC (family 25 model 1), 2 threads: fp32 FMA peak 184 (dashed), bf16 dot peak 0 GFLOP/s (dotted); -c = causal'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -45 scale 0
set grid ytics
set ylabel 'GFLOP/s'
set key top left
set yrange [0:202]
set title 'forward'
set arrow 1 from graph 0, first 183.7644785533296 to graph 1, first 183.7644785533296 nohead dt 2 front
plot 'peers.dat' index 0 using 2:xtic(1) title 'cpu', '' index 0 using 3:xtic(1) title 'standard', '' index 0 using 4:xtic(1) title 'torch-flash', '' index 0 using 5:xtic(1) title 'torch-math'
set title 'backward'
set arrow 1 from graph 0, first 183.7644785533296 to graph 1, first 183.7644785533296 nohead dt 2 front
plot 'peers.dat' index 1 using 2:xtic(1) title 'cpu', '' index 1 using 3:xtic(1) title 'standard', '' index 1 using 4:xtic(1) title 'torch-flash', '' index 1 using 5:xtic(1) title 'torch-math'
unset multiplot
