from glob import glob

from setuptools import find_packages, setup

package_name = "tinker"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    package_data={package_name: ["web/*.html"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.launch.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.xml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="tinker developers",
    maintainer_email="tinker@example.org",
    description="tinker ROS 2 control stack: perception, policy, safety and robot nodes",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "sim_robot = tinker.sim_robot:main",
        "perception = tinker.perception:main",
        "policy = tinker.policy:main",
        "safety = tinker.safety:main",
        "experience_bridge = tinker.experience_bridge:main",
        "view = tinker.view:main",
        "lifecycle_up = tinker.lifecycle_up:main",
    ]},
)
