module @switch_of_scans {
  func.func public @main(%arg0: tensor<i32>, %arg1: tensor<3x2xf32>) -> (tensor<2xf32>) {
    %0 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<i32>} : () -> tensor<i32>
    %1 = "stablehlo.constant"() {value = dense<"0x02000000"> : tensor<i32>} : () -> tensor<i32>
    %2 = "stablehlo.clamp"(%0, %arg0, %1) : (tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<i32>
    %62 = "stablehlo.case"(%2) ({
      %3 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<2xf32>} : () -> tensor<2xf32>
      %4 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
      %19:3 = "stablehlo.while"(%4, %3, %arg1) ({
      ^bb0(%it5: tensor<i64>, %it6: tensor<2xf32>, %it7: tensor<3x2xf32>):
        %8 = "stablehlo.constant"() {value = dense<"0x0300000000000000"> : tensor<i64>} : () -> tensor<i64>
        %9 = "stablehlo.compare"(%it5, %8) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
        "stablehlo.return"(%9) : (tensor<i1>) -> ()
      }, {
      ^bb0(%it10: tensor<i64>, %it11: tensor<2xf32>, %it12: tensor<3x2xf32>):
        %13 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
        %14 = "stablehlo.dynamic_slice"(%it12, %it10, %13) {slice_sizes = array<i64: 1, 2>} : (tensor<3x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x2xf32>
        %15 = "stablehlo.reshape"(%14) : (tensor<1x2xf32>) -> tensor<2xf32>
        %16 = "stablehlo.add"(%it11, %15) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
        %17 = "stablehlo.constant"() {value = dense<"0x0100000000000000"> : tensor<i64>} : () -> tensor<i64>
        %18 = "stablehlo.add"(%it10, %17) : (tensor<i64>, tensor<i64>) -> tensor<i64>
        "stablehlo.return"(%18, %16, %it12) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> ()
      }) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>)
      "stablehlo.return"(%19#1) : (tensor<2xf32>) -> ()
    }, {
      %20 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<2xf32>} : () -> tensor<2xf32>
      %21 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
      %39:3 = "stablehlo.while"(%21, %20, %arg1) ({
      ^bb0(%it22: tensor<i64>, %it23: tensor<2xf32>, %it24: tensor<3x2xf32>):
        %25 = "stablehlo.constant"() {value = dense<"0x0300000000000000"> : tensor<i64>} : () -> tensor<i64>
        %26 = "stablehlo.compare"(%it22, %25) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
        "stablehlo.return"(%26) : (tensor<i1>) -> ()
      }, {
      ^bb0(%it27: tensor<i64>, %it28: tensor<2xf32>, %it29: tensor<3x2xf32>):
        %30 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
        %31 = "stablehlo.dynamic_slice"(%it29, %it27, %30) {slice_sizes = array<i64: 1, 2>} : (tensor<3x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x2xf32>
        %32 = "stablehlo.reshape"(%31) : (tensor<1x2xf32>) -> tensor<2xf32>
        %33 = "stablehlo.constant"() {value = dense<"0x00000040"> : tensor<f32>} : () -> tensor<f32>
        %34 = "stablehlo.add"(%it28, %32) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
        %35 = "stablehlo.broadcast_in_dim"(%33) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
        %36 = "stablehlo.multiply"(%34, %35) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
        %37 = "stablehlo.constant"() {value = dense<"0x0100000000000000"> : tensor<i64>} : () -> tensor<i64>
        %38 = "stablehlo.add"(%it27, %37) : (tensor<i64>, tensor<i64>) -> tensor<i64>
        "stablehlo.return"(%38, %36, %it29) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> ()
      }) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>)
      "stablehlo.return"(%39#1) : (tensor<2xf32>) -> ()
    }, {
      %40 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<2xf32>} : () -> tensor<2xf32>
      %41 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
      %61:3 = "stablehlo.while"(%41, %40, %arg1) ({
      ^bb0(%it42: tensor<i64>, %it43: tensor<2xf32>, %it44: tensor<3x2xf32>):
        %45 = "stablehlo.constant"() {value = dense<"0x0300000000000000"> : tensor<i64>} : () -> tensor<i64>
        %46 = "stablehlo.compare"(%it42, %45) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
        "stablehlo.return"(%46) : (tensor<i1>) -> ()
      }, {
      ^bb0(%it47: tensor<i64>, %it48: tensor<2xf32>, %it49: tensor<3x2xf32>):
        %50 = "stablehlo.constant"() {value = dense<"0x0200000000000000"> : tensor<i64>} : () -> tensor<i64>
        %51 = "stablehlo.subtract"(%50, %it47) : (tensor<i64>, tensor<i64>) -> tensor<i64>
        %52 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
        %53 = "stablehlo.dynamic_slice"(%it49, %51, %52) {slice_sizes = array<i64: 1, 2>} : (tensor<3x2xf32>, tensor<i64>, tensor<i64>) -> tensor<1x2xf32>
        %54 = "stablehlo.reshape"(%53) : (tensor<1x2xf32>) -> tensor<2xf32>
        %55 = "stablehlo.constant"() {value = dense<"0x00004040"> : tensor<f32>} : () -> tensor<f32>
        %56 = "stablehlo.add"(%it48, %54) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
        %57 = "stablehlo.broadcast_in_dim"(%55) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
        %58 = "stablehlo.multiply"(%56, %57) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
        %59 = "stablehlo.constant"() {value = dense<"0x0100000000000000"> : tensor<i64>} : () -> tensor<i64>
        %60 = "stablehlo.add"(%it47, %59) : (tensor<i64>, tensor<i64>) -> tensor<i64>
        "stablehlo.return"(%60, %58, %it49) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> ()
      }) : (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>) -> (tensor<i64>, tensor<2xf32>, tensor<3x2xf32>)
      "stablehlo.return"(%61#1) : (tensor<2xf32>) -> ()
    }) : (tensor<i32>) -> (tensor<2xf32>)
    return %62 : tensor<2xf32>
  }
}
