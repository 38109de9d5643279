module @mlp_train attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=2]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg2: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}, %arg3: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}, %arg4: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg5: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg6: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg7: tensor<2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg8: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg9: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg10: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg11: tensor<2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}, tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) {
    %0 = "stablehlo.dot_general"(%arg0, %arg4) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    %1 = "stablehlo.broadcast_in_dim"(%arg5) {broadcast_dimensions = array<i64: 1>} : (tensor<8xf32>) -> tensor<8x8xf32>
    %2 = "stablehlo.add"(%0, %1) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %3 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
    %4 = "stablehlo.broadcast_in_dim"(%3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x8xf32>
    %5 = "stablehlo.maximum"(%2, %4) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %6 = "stablehlo.compare"(%4, %4) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xi1>
    %7 = "stablehlo.compare"(%2, %2) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xi1>
    %8 = "stablehlo.select"(%6, %4, %5) : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %9 = "stablehlo.select"(%7, %2, %8) : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %10 = "stablehlo.dot_general"(%9, %arg6) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<8x8xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %11 = "stablehlo.broadcast_in_dim"(%arg7) {broadcast_dimensions = array<i64: 1>} : (tensor<2xf32>) -> tensor<8x2xf32>
    %12 = "stablehlo.add"(%10, %11) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %13 = "stablehlo.subtract"(%12, %arg1) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %14 = "stablehlo.multiply"(%13, %13) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %15 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
    %16 = "stablehlo.reduce"(%14, %15) ({
    ^bb0(%lhs16: tensor<f32>, %rhs16: tensor<f32>):
      %red16 = "stablehlo.add"(%lhs16, %rhs16) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red16) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0, 1>} : (tensor<8x2xf32>, tensor<f32>) -> tensor<f32>
    %17 = "stablehlo.constant"() {value = dense<"0x00008041"> : tensor<f32>} : () -> tensor<f32>
    %18 = "stablehlo.divide"(%16, %17) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %19 = "stablehlo.constant"() {value = dense<"0x0000803D"> : tensor<8x2xf32>} : () -> tensor<8x2xf32>
    %20 = "stablehlo.multiply"(%19, %13) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %21 = "stablehlo.add"(%20, %20) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %22 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
    %23 = "stablehlo.reduce"(%21, %22) ({
    ^bb0(%lhs23: tensor<f32>, %rhs23: tensor<f32>):
      %red23 = "stablehlo.add"(%lhs23, %rhs23) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red23) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<8x2xf32>, tensor<f32>) -> tensor<2xf32>
    %24 = "stablehlo.dot_general"(%21, %arg6) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>} : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x8xf32>
    %25 = "stablehlo.dot_general"(%21, %9) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>} : (tensor<8x2xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
    %26 = "stablehlo.transpose"(%25) {permutation = array<i64: 1, 0>} : (tensor<2x8xf32>) -> tensor<8x2xf32>
    %27 = "stablehlo.broadcast_in_dim"(%3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x8xf32>
    %28 = "stablehlo.compare"(%2, %27) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xi1>
    %29 = "stablehlo.broadcast_in_dim"(%3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x8xf32>
    %30 = "stablehlo.select"(%28, %24, %29) : (tensor<8x8xi1>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %31 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
    %32 = "stablehlo.reduce"(%30, %31) ({
    ^bb0(%lhs32: tensor<f32>, %rhs32: tensor<f32>):
      %red32 = "stablehlo.add"(%lhs32, %rhs32) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red32) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    %33 = "stablehlo.dot_general"(%30, %arg0) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>} : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %34 = "stablehlo.transpose"(%33) {permutation = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %35 = "stablehlo.constant"() {value = dense<"0x6666663F"> : tensor<f32>} : () -> tensor<f32>
    %36 = "stablehlo.broadcast_in_dim"(%35) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4x8xf32>
    %37 = "stablehlo.multiply"(%36, %arg8) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %38 = "stablehlo.add"(%37, %34) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %39 = "stablehlo.broadcast_in_dim"(%arg3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4x8xf32>
    %40 = "stablehlo.multiply"(%39, %38) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %41 = "stablehlo.subtract"(%arg4, %40) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %42 = "stablehlo.broadcast_in_dim"(%35) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8xf32>
    %43 = "stablehlo.multiply"(%42, %arg9) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %44 = "stablehlo.add"(%43, %32) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %45 = "stablehlo.broadcast_in_dim"(%arg3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8xf32>
    %46 = "stablehlo.multiply"(%45, %44) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %47 = "stablehlo.subtract"(%arg5, %46) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %48 = "stablehlo.broadcast_in_dim"(%35) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x2xf32>
    %49 = "stablehlo.multiply"(%48, %arg10) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %50 = "stablehlo.add"(%49, %26) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %51 = "stablehlo.broadcast_in_dim"(%arg3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x2xf32>
    %52 = "stablehlo.multiply"(%51, %50) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %53 = "stablehlo.subtract"(%arg6, %52) : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
    %54 = "stablehlo.broadcast_in_dim"(%35) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %55 = "stablehlo.multiply"(%54, %arg11) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %56 = "stablehlo.add"(%55, %23) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %57 = "stablehlo.broadcast_in_dim"(%arg3) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %58 = "stablehlo.multiply"(%57, %56) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %59 = "stablehlo.subtract"(%arg7, %58) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    return %18, %41, %47, %53, %59, %38, %44, %50, %56 : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<2xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<2xf32>
  }
}
