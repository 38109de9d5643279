module @scan_softmax {
  func.func public @main(%arg0: tensor<2xf32>, %arg1: tensor<5x2xf32>) -> (tensor<2xf32>, tensor<5x2xf32>) {
    %0 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
    %1 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<5x2xf32>} : () -> tensor<5x2xf32>
    %31:4 = "stablehlo.while"(%0, %arg0, %arg1, %1) ({
    ^bb0(%it2: tensor<i64>, %it3: tensor<2xf32>, %it4: tensor<5x2xf32>, %it5: tensor<5x2xf32>):
      %6 = "stablehlo.constant"() {value = dense<"0x0500000000000000"> : tensor<i64>} : () -> tensor<i64>
      %7 = "stablehlo.compare"(%it2, %6) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
      "stablehlo.return"(%7) : (tensor<i1>) -> ()
    }, {
    ^bb0(%it8: tensor<i64>, %it9: tensor<2xf32>, %it10: tensor<5x2xf32>, %it11: tensor<5x2xf32>):
      %12 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
      %13 = "stablehlo.dynamic_slice"(%it10, %it8, %12) {slice_sizes = array<i64: 1, 2>} : (tensor<5x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x2xf32>
      %14 = "stablehlo.reshape"(%13) : (tensor<1x2xf32>) -> tensor<2xf32>
      %15 = "stablehlo.constant"() {value = dense<"0x000080FF"> : tensor<f32>} : () -> tensor<f32>
      %16 = "stablehlo.reduce"(%14, %15) ({
      ^bb0(%red16_lhs: tensor<f32>, %red16_rhs: tensor<f32>):
        %red16_0 = "stablehlo.maximum"(%red16_lhs, %red16_rhs) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        %red16_1 = "stablehlo.compare"(%red16_rhs, %red16_rhs) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %red16_2 = "stablehlo.compare"(%red16_lhs, %red16_lhs) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %red16_3 = "stablehlo.select"(%red16_1, %red16_rhs, %red16_0) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
        %red16_4 = "stablehlo.select"(%red16_2, %red16_lhs, %red16_3) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%red16_4) : (tensor<f32>) -> ()
      }) {dimensions = array<i64: 0>} : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
      %17 = "stablehlo.reshape"(%16) : (tensor<f32>) -> tensor<1xf32>
      %18 = "stablehlo.broadcast_in_dim"(%17) {broadcast_dimensions = array<i64: 0>} : (tensor<1xf32>) -> tensor<2xf32>
      %19 = "stablehlo.subtract"(%14, %18) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      %20 = "stablehlo.exponential"(%19) : (tensor<2xf32>) -> tensor<2xf32>
      %21 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
      %22 = "stablehlo.reduce"(%20, %21) ({
      ^bb0(%lhs22: tensor<f32>, %rhs22: tensor<f32>):
        %red22 = "stablehlo.add"(%lhs22, %rhs22) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%red22) : (tensor<f32>) -> ()
      }) {dimensions = array<i64: 0>} : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
      %23 = "stablehlo.reshape"(%22) : (tensor<f32>) -> tensor<1xf32>
      %24 = "stablehlo.broadcast_in_dim"(%23) {broadcast_dimensions = array<i64: 0>} : (tensor<1xf32>) -> tensor<2xf32>
      %25 = "stablehlo.divide"(%20, %24) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      %26 = "stablehlo.add"(%it9, %25) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      %27 = "stablehlo.constant"() {value = dense<"0x0100000000000000"> : tensor<i64>} : () -> tensor<i64>
      %28 = "stablehlo.add"(%it8, %27) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      %29 = "stablehlo.reshape"(%26) : (tensor<2xf32>) -> tensor<1x2xf32>
      %30 = "stablehlo.dynamic_update_slice"(%it11, %29, %it8, %12) : (tensor<5x2xf32>, tensor<1x2xf32>, tensor<i64>, tensor<i64>) -> tensor<5x2xf32>
      "stablehlo.return"(%28, %26, %it10, %30) : (tensor<i64>, tensor<2xf32>, tensor<5x2xf32>, tensor<5x2xf32>) -> ()
    }) : (tensor<i64>, tensor<2xf32>, tensor<5x2xf32>, tensor<5x2xf32>) -> (tensor<i64>, tensor<2xf32>, tensor<5x2xf32>, tensor<5x2xf32>)
    return %31#1, %31#3 : tensor<2xf32>, tensor<5x2xf32>
  }
}
