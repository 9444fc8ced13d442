# A stand-in for the few nixpkgs `lib` functions iggyd's Nix files use, for
# offline checks only (scripts/check-nix.sh). Not a module system: options
# are plain records, mkIf is a marked record that eval-module.nix unwraps.
let
  lib = rec {
    genAttrs = names: f: builtins.listToAttrs (map (name: { inherit name; value = f name; }) names);
    importTOML = path: builtins.fromTOML (builtins.readFile path);
    optionals = cond: list: if cond then list else [ ];
    optional = cond: x: if cond then [ x ] else [ ];
    optionalAttrs = cond: attrs: if cond then attrs else { };
    inherit (builtins) filter;
    findFirst =
      pred: default: list:
      let
        found = builtins.filter pred list;
      in
      if found == [ ] then default else builtins.head found;
    unique = builtins.foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ];
    hasPrefix = prefix: s: builtins.substring 0 (builtins.stringLength prefix) s == prefix;
    last = list: builtins.elemAt list (builtins.length list - 1);
    splitString =
      sep: s:
      let
        escaped = builtins.replaceStrings [ "." "[" "]" "(" ")" "*" "+" "?" "|" "^" "$" ] [ "\\." "\\[" "\\]" "\\(" "\\)" "\\*" "\\+" "\\?" "\\|" "\\^" "\\$" ] sep;
      in
      builtins.filter builtins.isString (builtins.split escaped s);
    toInt =
      s:
      assert builtins.match "[0-9]+" s != null;
      builtins.fromJSON s;
    recursiveUpdate =
      a: b:
      a
      // builtins.mapAttrs (
        name: value:
        if builtins.isAttrs value && builtins.isAttrs (a.${name} or null) && !(value ? _type) then
          recursiveUpdate a.${name} value
        else
          value
      ) b;
    getExe' = pkg: name: "${pkg}/bin/${name}";
    literalExpression = text: {
      _type = "literalExpression";
      inherit text;
    };
    mkOption = attrs: attrs // { _type = "option"; };
    mkEnableOption =
      name:
      mkOption {
        type = types.bool;
        default = false;
        description = "Whether to enable ${name}.";
      };
    mkIf = condition: content: {
      _type = "if";
      inherit condition content;
    };
    mkDefault = content: {
      _type = "override";
      priority = 1000;
      inherit content;
    };
    types = {
      str = { name = "str"; };
      bool = { name = "bool"; };
      package = { name = "package"; };
      nullOr = elem: {
        name = "nullOr";
        inherit elem;
      };
      submodule = module: {
        name = "submodule";
        options = module.options or { };
      };
    };
    fileset = {
      unions =
        paths:
        assert builtins.all builtins.pathExists paths;
        paths;
      toSource = { root, fileset }: root;
    };
    licenses.asl20 = { spdxId = "Apache-2.0"; };
    platforms.linux = [
      "x86_64-linux"
      "aarch64-linux"
    ];
  };
in
lib
